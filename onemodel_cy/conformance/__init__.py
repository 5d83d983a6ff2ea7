"""Conformance of ports: the known-answer vectors, and a checker of a port's results.

    onemodel-cy conformance list                 the vector files, their cases and what they pin
    onemodel-cy conformance export DIR           copy the vectors (and their format notes) to DIR
    onemodel-cy conformance run [--out DIR]      replay every vector with this package (and write
                                                 its results in the results format to DIR)
    onemodel-cy conformance check RESULTS...     check a port's results files or folders

A results file mirrors a vector file: ``{"cases": [{"name": ..., "output": {...}}, ...]}``
with the same file name (``rng.json``, ...), each output in the vectors' encoding, each
name once. A case whose input must be refused has output ``{"error": "<a non-empty name>"}``.
A float array may carry its values (``values_f32`` or ``data_b64``) beside its hash, to be
told the first differing element; values that contradict the hash fail. A stream case
carries ``settings``: the digest of what each worker/prefetch setting its harness asks for
delivered (``harness.py``). The check fails when it compared nothing, and refuses the
vectors themselves (the answer key). The port author's guide is ``docs/conformance.md`` in
the source tree.

The checker and its command line are in ``checker.py``, the replay of a vector with this
package in ``replay.py``, the encoding in ``codec.py``; importing this package loads none
of them (``import onemodel_cy`` needs only the codec's list of a batch's fields).
"""
