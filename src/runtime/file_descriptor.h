// A POSIX file descriptor closed on every path out, exceptions included (and with it any flock).
#pragma once

#include <unistd.h>

namespace gemmkit::runtime {

struct FileDescriptor {
  int fd;
  explicit FileDescriptor(int f) : fd(f) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace gemmkit::runtime
