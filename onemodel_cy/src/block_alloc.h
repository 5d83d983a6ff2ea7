/* The package's raw memory: batch blocks (collate/bufferpool.pyx) and sealed storage
   (core/sealed.pyx) come from here. Needs Python.h (PyMem_RawMalloc) included first. */
#ifndef OM_BLOCK_ALLOC_H
#define OM_BLOCK_ALLOC_H

#include <stdint.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#define OM_HUGE_PAGE ((size_t)2 << 20)

/* Batch memory, from PyMem_RawMalloc (so tracemalloc and allocation hooks see it).
   A block of 2 MiB or more starts on a 2 MiB boundary and asks the kernel for
   transparent huge pages (honoured where THP is "madvise" or "always"): a batch of a
   few MiB then spans a couple of TLB entries instead of a thousand, which the batch
   writes feel (measured with benchmarks/bench_loader.py). The allocation's own start
   is kept in the word before the block. */
static void* om_block_alloc(size_t nbytes) {
    size_t align = nbytes >= OM_HUGE_PAGE ? OM_HUGE_PAGE : sizeof(void*);
    char* base;
    char* block;
    if (nbytes > SIZE_MAX - align - sizeof(void*)) return NULL;
    base = (char*)PyMem_RawMalloc(nbytes + align + sizeof(void*));
    if (base == NULL) return NULL;
    block = (char*)(((uintptr_t)base + sizeof(void*) + align - 1) / align * align);
    ((void**)block)[-1] = base;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == OM_HUGE_PAGE)
        madvise(block, nbytes, MADV_HUGEPAGE);   /* advice only: a refusal changes nothing */
#endif
    return block;
}

static void om_block_free(void* block) {
    if (block != NULL) PyMem_RawFree(((void**)block)[-1]);
}


#endif
