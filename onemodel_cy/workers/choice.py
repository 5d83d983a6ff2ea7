"""§1 ``worker_mode="auto"``: threads or processes, chosen from the pipeline itself.

Threads when the work of a batch runs without the GIL: a pipeline that ``splits()`` (a
packed view, no transform or a built-in one, no Python augmentation) runs in the packed
lane; a pipeline with no Python stage at all runs in worker threads. Processes when the
pipeline has Python stages (``Pipeline.python_stages()``: a dataset's own ``get_sample``, a
transform or an augmentation written in Python), which hold the GIL, so threads would
only take turns at them. Processes only where they can work, though; otherwise threads,
with a one-line ``UserWarning`` naming the reason and the way to silence it:

* the pipeline does not pickle (a lambda, a closure, an open file): worker processes
  receive it pickled;
* the main module cannot be imported by a worker process (``main_module_problem``): a
  script fed on standard input (``python - <<EOF``), whose ``__main__`` is ``'<stdin>'``;
* the pickled pipeline names something of ``__main__`` and the workers do not import
  ``__main__`` (an interactive session, a notebook, ``python -c``), so they cannot find it;
* the stream starts from the main script's top-level code outside an ``if __name__ ==
  "__main__":`` block: a worker imports the main script (forkserver and spawn do), which
  would run that code again in every worker.

``worker_mode="process"``, asked for explicitly, is not second-guessed, except that a main
module no worker can import is one clear error at the consumer (``check_main_module``)
instead of workers that all die before building a step.
"""
from __future__ import annotations

import ast
import multiprocessing.process
import os
import pickle
import sys
import warnings

__all__ = ["choose_worker_mode", "main_module_problem", "check_main_module", "unpicklable_part"]


def _main_path():
    """The file a worker process runs as the main module, as multiprocessing's spawn and
    forkserver compute it (``spawn.get_preparation_data``); None when there is none: a
    main module run by name (``python -m``, imported by name) or without a file
    (interactive, ``python -c``)."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return None
    path = getattr(main, "__file__", None)
    if path is None:
        return None
    if not os.path.isabs(path) and multiprocessing.process.ORIGINAL_DIR is not None:
        path = os.path.join(multiprocessing.process.ORIGINAL_DIR, path)
    return os.path.normpath(path)


def main_module_problem():
    """Why a worker process could not import this program's main module (a sentence), or None."""
    path = _main_path()
    if path is None or os.path.isfile(path):
        return None
    name = getattr(sys.modules.get("__main__"), "__file__", path)
    return (f"worker processes import the main module from its file, and __main__ here is {name!r}, which is "
            f"not a file (a script fed on standard input, such as `python - <<EOF`)")


def check_main_module():
    """(``worker_mode="process"``, before any worker starts.) Raise ``RuntimeError`` when no
    worker process can import the main module, naming the cause and the fix."""
    problem = main_module_problem()
    if problem is not None:
        raise RuntimeError(f"worker_mode='process' cannot start worker processes: {problem}. Save the script to "
                           f"a file and run it as `python script.py` (starting the loader under "
                           f"`if __name__ == \"__main__\":`), or use worker_mode='thread'")


def _main_file_of_module_code():
    """(file, line) of the main module's top-level code on this thread's stack, when the
    main module has a file a worker imports; else None."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is main.__dict__:
            return path, frame.f_lineno
        frame = frame.f_back
    return None


def _is_main_test(test):
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def unguarded_main_line():
    """The line of the main script's top-level code that is running now outside an
    ``if __name__ == "__main__":`` block (a worker importing the script would run it again),
    or None: not called from the main script's top level, or from inside the guard, or a
    script that cannot be read."""
    where = _main_file_of_module_code()
    if where is None:
        return None
    path, line = where
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.lineno <= line <= node.end_lineno:
            return None
    return line


def unpicklable_part(pipeline):
    """``(name, part, exception)`` for the first part of ``pipeline`` that does not pickle, else None."""
    parts = {"dataset": pipeline.dataset, "sampler": pipeline.sampler, "collator": pipeline.collator,
             "transform": pipeline.transform}
    for name, obj in parts.items():
        try:
            pickle.dumps(obj)
        except Exception as exc:
            return name, obj, exc
    return None


def _stages_text(stages):
    names = {"dataset": "the dataset's get_sample", "transform": "the transform", "augmentation": "the augmentation"}
    return ", ".join(names[s] for s in stages)


def choose_worker_mode(pipeline):
    """``("thread" | "process", why_not_processes)`` for ``pipeline``: ``why_not_processes``
    is None, or the sentence of the warning when the pipeline has Python stages but
    processes cannot serve it."""
    if pipeline.splits():
        return "thread", None
    stages = pipeline.python_stages()
    if not stages:
        return "thread", None
    problem = main_module_problem()
    if problem is None:
        part = unpicklable_part(pipeline)
        if part is not None:
            name, obj, exc = part
            named = obj if hasattr(obj, "__qualname__") else type(obj)
            problem = (f"the {name} {getattr(named, '__module__', '?')}.{named.__qualname__} cannot be pickled "
                       f"({type(exc).__name__}: {exc}); define it at module level, without lambdas, open files "
                       f"or locks, for processes")
    if problem is None and _main_path() is None and getattr(sys.modules.get("__main__"), "__file__", None) is None:
        if b"__main__" in pickle.dumps(pipeline):
            problem = ("the pipeline uses something defined in __main__, which worker processes do not import "
                       "here (an interactive session, a notebook or `python -c`); move it to a module")
    if problem is None:
        line = unguarded_main_line()
        if line is not None:
            problem = (f"line {line} of the main script starts the loader outside `if __name__ == "
                       f"\"__main__\":`, and every worker process would run that line again when it imports "
                       f"the script; put the script's work under that guard for processes")
    if problem is None:
        return "process", None
    return "thread", (f"onemodel_cy: worker_mode='auto' runs threads, not processes, for Python stages "
                      f"({_stages_text(stages)}): {problem}. Pass worker_mode='thread' to choose threads "
                      f"without this warning")


def warn_choice(message):
    """Show ``message`` (``choose_worker_mode``'s) once per choice, as a ``UserWarning``."""
    warnings.warn(message.replace("\n", " "), UserWarning, stacklevel=4)
