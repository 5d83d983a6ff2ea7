"""A sharded pack's pixel files mapped back to back into one read-only range: ``map_pixel_files``.

The reader (``reader.pyx``) calls it once the shards are checked; their index arrays are
joined over the range by ``format.join_shards`` (docs/safety.md, "Memory-mapped packs").
"""
cimport cython
cimport numpy as cnp
from posix.mman cimport (mmap, munmap, MAP_ANONYMOUS, MAP_FAILED, MAP_FIXED, MAP_NORESERVE, MAP_PRIVATE,
                         MAP_SHARED, PROT_NONE, PROT_READ)
from posix.unistd cimport sysconf, _SC_PAGESIZE
import os

from onemodel_cy.data.packs.format import PackError

cnp.import_array()


@cython.final
cdef class PixelFiles:
    """One read-only range of address space holding several ``pixels.npy`` files back to
    back, each mapped whole from a page boundary; unmapped when the last array over it goes.

    The fetch step reads a pack through one pixels pointer (``PackedImages``): a sharded
    pack is served as one array over its shards' files (headers and page padding between
    them are never pointed at), each shard's offsets shifted by where its data lies."""
    cdef char* base
    cdef size_t length

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, self.length)


def map_pixel_files(list maps):
    """The files behind ``maps`` (each shard's checked ``np.memmap`` of its ``pixels.npy``)
    mapped read-only, back to back, into one reserved range: ``(array over the range of the
    maps' dtype, [element index of each file's first pixel in it])``. Each file is mapped
    at the size its check saw, so a file that changed size since is refused here."""
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
    cdef size_t length = 0
    cdef void* placed
    cdef PixelFiles owner = PixelFiles()
    dtype = maps[0].dtype
    starts, sizes = [], []
    for pixels in maps:
        size = <size_t>(pixels.offset + pixels.nbytes)       # header + data: the whole checked file
        starts.append(length)
        sizes.append(size)
        length += (size + page - 1) // page * page
    placed = mmap(NULL, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    if placed == MAP_FAILED:
        raise OSError(f"reserving {length} bytes of address space for the pixels of {len(maps)} shards failed")
    owner.base, owner.length = <char*>placed, length
    for pixels, start, size in zip(maps, starts, sizes):
        fd = os.open(pixels.filename, os.O_RDONLY)
        try:
            if os.fstat(fd).st_size != size:
                raise PackError(f"{pixels.filename}: holds {os.fstat(fd).st_size} bytes, {size} when it was "
                                f"checked (changed while the pack was being opened)")
            placed = mmap(owner.base + <size_t>start, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0)
            if placed == MAP_FAILED:
                raise OSError(f"mapping {pixels.filename} failed")
        finally:
            os.close(fd)
    cdef cnp.npy_intp count = <cnp.npy_intp>(length // dtype.itemsize)
    cdef cnp.ndarray array = cnp.PyArray_SimpleNewFromData(1, &count, dtype.num, owner.base)
    cnp.PyArray_CLEARFLAGS(array, cnp.NPY_ARRAY_WRITEABLE)
    cnp.set_array_base(array, owner)       # the range lives as long as the array
    return array, [(start + pixels.offset) // dtype.itemsize for pixels, start in zip(maps, starts)]
