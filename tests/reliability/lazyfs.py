"""A LazyFS-like FUSE filesystem (in the spirit of Jepsen's LazyFS): a passthrough to a backing
directory that keeps every file's unsynced data in memory until fsync. Killing this process
(SIGKILL) is a power cut: what was written but not fsynced never reaches the backing directory.

Metadata (create, rename, unlink, mkdir) goes straight through, so it survives a cut even
without a directory fsync; real disks may be harsher there. Single-threaded on purpose.

    python -m tests.reliability.lazyfs BACKING_DIR MOUNT_POINT     (foreground; kill to cut)
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import mfusepy
from mfusepy import FUSE, FuseOSError, Operations

_STAT_FIELDS = (
    "st_atime",
    "st_ctime",
    "st_gid",
    "st_mode",
    "st_mtime",
    "st_nlink",
    "st_size",
    "st_uid",
)


class LazyFS(Operations):  # type: ignore[misc]
    use_ns = True  # utimens gets nanoseconds

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)
        self.dirty: dict[str, bytearray] = {}  # real path -> whole current content (unsynced)
        self.synced_files = 0

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _content(self, real: str) -> bytearray:
        """The file's current bytes, loaded into the dirty map on first change."""
        buf = self.dirty.get(real)
        if buf is None:
            with open(real, "rb") as f:
                buf = bytearray(f.read())
            self.dirty[real] = buf
        return buf

    # ---- metadata: straight through ------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        real = self._real(path)
        try:
            st = os.lstat(real)
        except OSError as err:
            raise FuseOSError(err.errno) from None
        attrs = {k: getattr(st, k) for k in _STAT_FIELDS}
        if real in self.dirty:
            attrs["st_size"] = len(self.dirty[real])
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise FuseOSError(errno.EACCES)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        real = self._real(path)
        os.unlink(real)
        self.dirty.pop(real, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        real_old, real_new = self._real(old), self._real(new)
        os.rename(real_old, real_new)
        self.dirty.pop(real_new, None)
        if real_old in self.dirty:
            self.dirty[real_new] = self.dirty.pop(real_old)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._real(path), ns=times)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        names = (
            "f_bavail",
            "f_bfree",
            "f_blocks",
            "f_bsize",
            "f_favail",
            "f_ffree",
            "f_files",
            "f_flag",
            "f_frsize",
            "f_namemax",
        )
        return {k: getattr(st, k) for k in names}

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0

    # ---- data: buffered until fsync ----------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        flags &= ~(os.O_APPEND | os.O_WRONLY)  # offsets come from the kernel; we read too
        return os.open(self._real(path), flags | os.O_RDWR)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        real = self._real(path)
        fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
        self.dirty.pop(real, None)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        buf = self.dirty.get(self._real(path))
        if buf is not None:
            return bytes(buf[offset : offset + size])
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        buf = self._content(self._real(path))
        if offset > len(buf):
            buf.extend(b"\0" * (offset - len(buf)))
        buf[offset : offset + len(data)] = data
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        buf = self._content(self._real(path))
        if length < len(buf):
            del buf[length:]
        else:
            buf.extend(b"\0" * (length - len(buf)))
        return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        raise FuseOSError(errno.EOPNOTSUPP)  # RocksDB treats preallocation as best effort

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        real = self._real(path)
        buf = self.dirty.pop(real, None)
        if buf is not None:
            fd = os.open(real, os.O_WRONLY)
            try:
                os.pwrite(fd, bytes(buf), 0)
                os.ftruncate(fd, len(buf))
                os.fsync(fd)
            finally:
                os.close(fd)
            self.synced_files += 1
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() is not a sync: the data stays in memory

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0


def main() -> None:
    backing, mount = sys.argv[1], sys.argv[2]
    print(f"lazyfs {mfusepy.__name__}: {backing} on {mount}", flush=True)
    FUSE(LazyFS(backing), mount, foreground=True, nothreads=True)


if __name__ == "__main__":
    main()
