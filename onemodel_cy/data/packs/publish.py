"""The exclusive publish of a finished pack, shard or sharded pack (``docs/packed-format.md``).

A writer builds its folder under a hidden temporary name beside the destination and
renames it into place in one step (``publish``) once everything in it is on the disk: the
rename never replaces what another writer published meanwhile unless ``overwrite`` (and
then, of two writers replacing one pack, the last to publish wins and nothing published is
lost). Used by the pack writer (``writer.py``) and the sharded writer (``sharded.py``).
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys

from onemodel_cy.data.packs import format as _format    # FSYNC, read when called (the tests turn it off)


def publish(tmp: str, out: str, overwrite: bool) -> None:
    """Rename the finished folder ``tmp`` (a pack, a shard, a sharded pack) to ``out`` in one
    step that never replaces what is there, unless ``overwrite`` (then what is there is
    moved aside first and removed once the new pack is in place and the rename on the disk)."""
    moved = []
    if not overwrite:
        try:
            rename_exclusive(tmp, out)
        except FileExistsError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FileExistsError(
                f"{out}: another writer published it while this pack was being written; it was "
                f"left as it is, and this writer's partial folder {tmp} was removed (pass "
                f"overwrite=True / --overwrite to replace it)") from None
    else:
        moved = publish_replacing(tmp, out)
    try:
        sync_folder(os.path.dirname(out))      # the rename itself reaches the disk
    finally:
        for aside in moved:
            remove_path(aside)


def publish_replacing(tmp: str, out: str) -> list:
    """Move what lies at ``out`` aside and publish exclusively, again until it succeeds,
    so a writer that moved a pack aside never leaves ``out`` empty: when two writers
    replace one pack, the last to publish wins and the other's pack is removed, never
    both. The folders moved aside, to remove."""
    moved = []
    try:
        for attempt in range(PUBLISH_ATTEMPTS):
            try:
                rename_exclusive(tmp, out)
                return moved
            except FileExistsError:
                pass
            aside = f"{tmp}.replaced-{attempt}"
            try:
                os.rename(out, aside)
            except FileNotFoundError:       # another writer moved it aside first: publish again
                continue
            moved.append(aside)
        raise FileExistsError(f"{out}: other writers kept publishing here; {PUBLISH_ATTEMPTS} "
                              f"attempts to replace it failed, and this writer's partial folder was removed")
    except BaseException:
        # Put the newest pack moved aside back while the place is still empty: a failed
        # replace loses nothing that was published.
        if moved:
            try:
                rename_exclusive(moved.pop(), out)
            except OSError:
                pass
        for aside in moved:
            remove_path(aside)
        raise


PUBLISH_ATTEMPTS = 100

# renameat2(2) with RENAME_NOREPLACE (Linux 3.15+, glibc 2.28+): an atomic rename that fails
# with EEXIST instead of replacing the destination.
AT_FDCWD, RENAME_NOREPLACE = -100, 1


def load_renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):          # a libc without it (musl before 1.2.5, old glibc)
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


renameat2 = load_renameat2()


def rename_exclusive(src: str, dst: str) -> None:
    """Rename the folder ``src`` to ``dst`` in one step, or raise FileExistsError if ``dst``
    exists: never replace it."""
    if renameat2 is not None:
        if renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):    # EINVAL: a file system without the flag
            raise OSError(code, os.strerror(code), src, None, dst)     # EEXIST: a FileExistsError
    # Portable: a folder renamed onto a file or a non-empty folder fails (ENOTDIR, ENOTEMPTY
    # or EEXIST; Windows refuses any existing name), but it silently replaces an empty
    # folder: that one is refused first (one appearing between the check and the rename is
    # replaced, which loses no data).
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    try:
        os.rename(src, dst)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR) and os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst) from error
        raise


def remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except OSError:
            pass


def sync_folder(folder: str) -> None:
    """fsync a folder (its entries), where the platform allows opening one."""
    if not _format.FSYNC or not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
