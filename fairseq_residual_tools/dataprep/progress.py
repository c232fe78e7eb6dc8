"""Progress display for long stages, on stderr.

On a terminal one line is rewritten in place (at most twice a second); in a log
file a line is written every 30 seconds, so CI logs stay short.
"""

import sys
import time


class Progress:
    def __init__(self, desc: str, total=None, unit="lines", quiet=False, start=0):
        self.desc, self.total, self.unit, self.quiet = desc, total, unit, quiet
        self.count = start
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.interval = 0.5 if self.tty else 30.0
        self.last = self.started

    def _format(self, n):
        if self.unit == "B":
            return f"{n / 2**20:,.1f} MiB"
        return f"{n:,} {self.unit}"

    def _line(self):
        text = f"{self.desc}: {self._format(self.count)}"
        if self.total:
            text += f" / {self._format(self.total)} ({100 * self.count / self.total:.0f}%)"
        elapsed = time.monotonic() - self.started
        return text + f" [{elapsed:.0f}s]"

    def update(self, n=1):
        self.count += n
        now = time.monotonic()
        if not self.quiet and now - self.last >= self.interval:
            self.last = now
            sys.stderr.write(("\r" + self._line()) if self.tty else self._line() + "\n")
            sys.stderr.flush()

    def close(self):
        if self.quiet:
            return
        if self.tty:
            sys.stderr.write("\r" + self._line() + "\n")
        elif time.monotonic() - self.started >= self.interval:
            sys.stderr.write(self._line() + " done\n")
        sys.stderr.flush()
