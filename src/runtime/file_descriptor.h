// A POSIX file descriptor closed on every path out, exceptions included (and with it any flock),
// and the one way the library opens its own files (cache entries, the tuning database): regular
// files only, without ever blocking on a FIFO or a device.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

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

// "a FIFO", "a directory", ...: what a file of mode `mode` is, for messages.
inline const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// Why a file could not be opened: `missing` for a plain absence (ENOENT, or ENOTDIR where a
// component of the path is a file), else `reason`, strerror's text or "a FIFO, not a regular
// file".
struct OpenFailure {
  bool missing = false;
  bool not_regular = false;
  std::string reason;
};

// Opens `path` with `flags` (O_CLOEXEC added; `mode` where O_CREAT creates it) if it is a
// regular file, symlinks followed, and returns the descriptor; else -1 and fills `failure`.
// Anything else at the path is refused before it is opened where possible, and the open itself
// is non-blocking (O_NONBLOCK, cleared afterwards), so that a FIFO cannot hang the open and a
// device swapped in meanwhile is refused by fstat before any read.
inline int open_regular(const char* path, int flags, mode_t mode, OpenFailure& failure) {
  auto fail = [&](int error) {
    failure.missing = error == ENOENT || error == ENOTDIR;
    failure.reason = std::strerror(error);
    return -1;
  };
  auto refuse = [&](mode_t kind) {
    failure.not_regular = true;
    failure.reason = std::string(file_kind(kind)) + ", not a regular file";
    return -1;
  };
  struct stat st;
  if (::stat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) return refuse(st.st_mode);
  } else if (errno != ENOENT || (flags & O_CREAT) == 0) {
    return fail(errno);
  }
  const int fd = ::open(path, flags | O_NONBLOCK | O_CLOEXEC, mode);
  if (fd < 0) return fail(errno);
  FileDescriptor file(fd);
  if (::fstat(fd, &st) != 0) return fail(errno);
  if (!S_ISREG(st.st_mode)) return refuse(st.st_mode);
  // Regular files never block, but clearing the flag keeps reads and writes plain.
  if ((flags & O_NONBLOCK) == 0) {
    const int status = ::fcntl(fd, F_GETFL);
    if (status < 0 || ::fcntl(fd, F_SETFL, status & ~O_NONBLOCK) != 0) return fail(errno);
  }
  return std::exchange(file.fd, -1);
}

}  // namespace gemmkit::runtime
