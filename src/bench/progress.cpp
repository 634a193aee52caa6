#include "bench/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>

namespace gemmkit::tools {
namespace {

constexpr size_t kBarWidth = 20;

// Columns of the terminal behind `out`; 80 where it does not say.
size_t columns(std::FILE* out) {
  winsize size{};
  if (ioctl(fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

}  // namespace

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(seconds, 0.0));
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof text, "%lds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s / 60 % 60);
  }
  return text;
}

std::string progress_line(const std::string& counter, const std::string& item, size_t done, size_t total,
                          double elapsed_s, size_t width) {
  std::string line = counter + " " + item + "  " + format_duration(elapsed_s);
  if (done > 0 && done < total) {
    line += ", ~" + format_duration(elapsed_s / double(done) * double(total - done)) + " left";
  }
  // One column short of the width: a full line would wrap on some terminals and break the redraw.
  if (width > 1 && line.size() >= width) line.resize(width - 1);
  return line;
}

Progress::Progress(size_t total, std::FILE* out) : Progress(total, out, isatty(fileno(out)) != 0) {}

Progress::Progress(size_t total, std::FILE* out, bool bar)
    : out_(out), total_(total), bar_(bar), start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

std::string Progress::counter(size_t done) const { return counter(done, done); }

std::string Progress::counter(size_t done, size_t number) const {
  const size_t filled = total_ == 0 ? kBarWidth : std::min(done, total_) * kBarWidth / total_;
  std::string text = "[";
  text.append(filled, '#').append(kBarWidth - filled, '.');
  return text.append("] ").append(std::to_string(number)).append("/").append(std::to_string(total_));
}

void Progress::begin(const std::string& item) {
  item_ = item;
  if (bar_) draw();
}

void Progress::done(const std::string& line) {
  ++done_;
  if (bar_) {
    draw();
  } else if (!line.empty()) {
    std::fprintf(out_, "%s\n", line.c_str());
  }
}

void Progress::note(const std::string& line) {
  clear();
  std::fprintf(out_, "%s\n", line.c_str());
  if (bar_ && done_ < total_) draw();
}

void Progress::finish() { clear(); }

void Progress::draw() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // The bar fills with the items done; the number counts those begun: "3/12" while the third runs.
  const size_t number = std::min(done_ + (done_ < total_ ? 1 : 0), total_);
  const std::string line = progress_line(counter(done_, number), item_, done_, total_, elapsed, columns(out_));
  std::fprintf(out_, "\r\033[K%s", line.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void Progress::clear() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace gemmkit::tools
