"""A suite run's progress on a stream (python -m gemmkit.bench prints it on stderr). On a terminal
one line at the bottom is redrawn in place: a bar, the count of problems done, the problem in
hand and the time left, estimated from the problems done so far; the lines printed through it
scroll above. Elsewhere (a file, a pipe, CI's log) only those lines are written, each once."""

import shutil
import time


def duration(seconds):
    """seconds as "42 s", "3:07" or "1:02:03"."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02}:{seconds:02}" if hours else f"{minutes}:{seconds:02}"


class Progress:
    BAR = 20  # characters

    def __init__(self, total, stream, clock=time.monotonic):
        self.total, self.done, self.stream, self.clock = total, 0, stream, clock
        self.live = stream.isatty()
        self.started = clock()
        self.shape = ""

    def status(self):
        """The bottom line: bar, count, problem in hand, time left."""
        filled = self.BAR * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (self.BAR - filled)}] {self.done}/{self.total}"
        if self.shape:
            line += f" {self.shape}"
        if self.done:
            left = (self.clock() - self.started) / self.done * (self.total - self.done)
            line += f", about {duration(left)} left"
        width = shutil.get_terminal_size((80, 24)).columns - 1
        return line[:width]

    def _draw(self):
        if self.live:
            self.stream.write("\r\033[K" + self.status())
            self.stream.flush()

    def start(self, shape):
        """The next problem, `shape`, is in hand."""
        self.shape = shape
        self._draw()

    def finish(self):
        """The problem in hand is done."""
        self.done += 1
        self.shape = ""
        self._draw()

    def print(self, line):
        """A line above the bar (on a terminal), or just the line."""
        self.stream.write(("\r\033[K" if self.live else "") + line + "\n")
        self.stream.flush()
        self._draw()

    def close(self):
        """Clears the bar, leaving the lines printed."""
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.flush()
