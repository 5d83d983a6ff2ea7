"""Bytes allocated on the calling thread, the way §5 counts them.

``tracemalloc`` sees every thread at once and only reports memory still alive; §5 speaks
of what *loading the next batch* allocates *on the calling thread*, as .NET's
``GC.GetAllocatedBytesForCurrentThread`` does. While installed, this module wraps
Python's three allocator domains (raw, mem, object) and adds every requested size to a
thread-local counter. That covers every Python object, every pooled batch buffer
(``PyMem_RawMalloc``) and numpy's shape/stride arrays; numpy's array *data* goes through
numpy's own allocator, which ``tracemalloc`` does see, so benchmarks report both.
"""

cdef extern from *:
    """
    #include <Python.h>
    #if defined(_MSC_VER)
    #define OM_THREAD_LOCAL __declspec(thread)
    #else
    #define OM_THREAD_LOCAL _Thread_local
    #endif
    static OM_THREAD_LOCAL unsigned long long om_thread_bytes = 0;
    static OM_THREAD_LOCAL unsigned long long om_thread_calls = 0;
    static PyMemAllocatorEx om_original[3];
    static int om_installed = 0;

    static void* om_malloc(void* ctx, size_t size) {
        PyMemAllocatorEx* a = (PyMemAllocatorEx*)ctx;
        om_thread_bytes += size; om_thread_calls += 1;
        return a->malloc(a->ctx, size);
    }
    static void* om_calloc(void* ctx, size_t nelem, size_t elsize) {
        PyMemAllocatorEx* a = (PyMemAllocatorEx*)ctx;
        om_thread_bytes += nelem * elsize; om_thread_calls += 1;
        return a->calloc(a->ctx, nelem, elsize);
    }
    static void* om_realloc(void* ctx, void* ptr, size_t size) {
        PyMemAllocatorEx* a = (PyMemAllocatorEx*)ctx;
        om_thread_bytes += size; om_thread_calls += 1;
        return a->realloc(a->ctx, ptr, size);
    }
    static void om_free(void* ctx, void* ptr) {
        PyMemAllocatorEx* a = (PyMemAllocatorEx*)ctx;
        a->free(a->ctx, ptr);
    }
    static void om_install(void) {
        PyMemAllocatorDomain domains[3] = {PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
        if (om_installed) return;
        for (int i = 0; i < 3; i++) {
            PyMem_GetAllocator(domains[i], &om_original[i]);
            PyMemAllocatorEx hook = {&om_original[i], om_malloc, om_calloc, om_realloc, om_free};
            PyMem_SetAllocator(domains[i], &hook);
        }
        om_installed = 1;
    }
    static unsigned long long om_bytes(void) { return om_thread_bytes; }
    static unsigned long long om_calls(void) { return om_thread_calls; }
    static int om_is_installed(void) { return om_installed; }
    """
    void om_install()
    unsigned long long om_bytes()
    unsigned long long om_calls()
    int om_is_installed()


def install():
    """Start counting (idempotent; stays installed for the life of the process: a hook
    cannot be removed safely while memory it handed out may still be freed through it)."""
    om_install()


def installed():
    return bool(om_is_installed())


def thread_allocated():
    """(bytes, allocation calls) requested on the calling thread since ``install()``."""
    if not om_is_installed():
        raise RuntimeError("call onemodel_cy.testing._alloccount.install() first")
    return om_bytes(), om_calls()
