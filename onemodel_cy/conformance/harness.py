"""The worker/prefetch harness of the stream cases, in one place: what a port runs, what
it writes, what ``check`` requires.

§1 makes the batch at a global step a function of the seed, the step and the
configuration alone: the number of workers and the prefetch depth change only when a
batch is built. A ``stream_iter`` or ``stream_digest`` case names, in ``input.harness``,
the settings its stream must be run under (every pair of ``workers`` x ``prefetch``).
Its results carry ``settings``: one record per pair,

    {"workers": "3", "prefetch": "4", "sha256": "<64 hex digits>", "error_at": [...]}

where ``sha256`` hashes the 32-byte ``batch_digest`` of every batch that setting
delivered (runs in the order of ``runs``, each run's batches in delivery order) and
``error_at`` (``stream_iter`` only) lists each run's ``error_at``. ``check`` requires a
record for every pair asked and no other, and each record to match the vectors: a
setting reported with other bytes, another order or another error step fails. What
``check`` cannot see is whether a port ran a setting at all (a record can be written from
batches computed one step at a time, and a ``stream_digest``'s is the vectors' own
``sha256``); docs/conformance.md says so.
"""
from __future__ import annotations

import hashlib
import re

from onemodel_cy.conformance.codec import BATCH_FIELDS, batch_digest, short

# A setting's workers and prefetch as a port writes them: a decimal string, no sign, no
# padding, no other spelling (the vectors' integer encoding).
DECIMAL = re.compile(r"0|[1-9][0-9]*")
MAX_DIGITS = 20     # 2^64 has 20 digits: a longer decimal names no setting (and is shown cut)


def asked(inp) -> list:
    """Every (workers, prefetch) pair of the case's ``harness``, in order; ``[(0, 2)]``
    for a case without one."""
    harness = inp.get("harness") or {"workers": ["0"], "prefetch": ["2"]}
    return [(int(w), int(p)) for w in harness["workers"] for p in harness["prefetch"]]


class Delivery:
    """What one setting's streams delivered: each batch's digest and each run's error."""

    def __init__(self):
        self.digests, self.errors = [], []

    def add(self, batch) -> bytes:
        """Digests ``batch`` (still open) and returns its 32-byte digest."""
        digest = batch_digest({name: getattr(batch, name) for name in BATCH_FIELDS})
        self.digests.append(digest)
        return digest

    def record(self, workers, prefetch, with_errors) -> dict:
        out = {"workers": str(workers), "prefetch": str(prefetch),
               "sha256": hashlib.sha256(b"".join(self.digests)).hexdigest()}
        if with_errors:
            out["error_at"] = list(self.errors)
        return out


def under_every_setting(inp, build, with_errors):
    """``build(workers, prefetch, delivery)`` (an output, filling ``delivery``) under each
    setting asked. The output is the first setting's, or the first that differs from it
    (so that a check against the vectors fails on it); ``settings`` holds every setting's
    record and ``harness`` says in words what was run."""
    records, first, shown = [], None, None
    for workers, prefetch in asked(inp):
        delivery = Delivery()
        output = build(workers, prefetch, delivery)
        records.append(delivery.record(workers, prefetch, with_errors))
        if first is None:
            first = shown = output
            note = " ".join(f"workers={w},prefetch={p}" for w, p in asked(inp))
        elif output != first and shown is first:
            shown = output
            note = f"workers={workers} prefetch={prefetch} differs from {_name(records[0])}"
    return dict(shown, settings=records, harness=note)


def _name(record) -> str:
    """A record named by its setting as the port wrote it, cut and on one line."""
    return f"workers={_shown(record.get('workers'))} prefetch={_shown(record.get('prefetch'))}"


def _shown(value) -> str:
    # A canonical decimal string as it is; anything else as a cut repr (no newline gets through).
    return value if isinstance(value, str) and DECIMAL.fullmatch(value) and len(value) <= MAX_DIGITS else short(value)


def settings_differences(case, got, expected_sha256) -> list:
    """What is wrong with the ``settings`` of a port's output ``got`` for a stream case
    ``case`` (its vector): a setting asked and missing, one not asked, one twice, and each
    record's ``sha256`` against ``expected_sha256`` (a callable: the digest every setting
    must give) and its ``error_at`` against the vector's runs."""
    wanted = asked(case["input"])
    records = got.get("settings") if isinstance(got, dict) else None
    if records is None:
        return [f"output.settings: missing: run the case under each of its {len(wanted)} input.harness settings "
                f"({_listed(wanted)}) and write one record each (docs/conformance.md, 'The harness')"]
    if not isinstance(records, list):
        return [f"output.settings: expected a list of {len(wanted)} records, got {type(records).__name__}"]
    found, seen = [], set()
    errors = [run.get("error_at") for run in case["output"].get("runs", [])]
    for k, record in enumerate(records):
        if not isinstance(record, dict):
            found.append(f"output.settings[{k}]: expected an object {{workers, prefetch, sha256}}")
            continue
        if not all(isinstance(record.get(key), str) and DECIMAL.fullmatch(record[key])
                   for key in ("workers", "prefetch")):
            found.append(f"output.settings[{k}]: workers and prefetch must be decimal strings such as \"3\", got "
                         f"{_name(record)}")
            continue
        # int() of thousands of digits raises: a longer decimal is simply no setting asked.
        setting = tuple(int(record[key]) if len(record[key]) <= MAX_DIGITS else -1 for key in ("workers", "prefetch"))
        where = f"output.settings[{_name(record)}]"
        if setting not in wanted:
            found.append(f"{where}: not a setting this case asks for (it asks for {_listed(wanted)})")
        elif setting in seen:
            found.append(f"{where}: reported twice")
        else:
            seen.add(setting)
            if record.get("sha256") != expected_sha256():
                found.append(f"{where}.sha256: the batches delivered under this setting are not the vectors' "
                             f"(expected {expected_sha256()}, got {short(record.get('sha256'))})")
            if "runs" in case["output"] and record.get("error_at") != errors:
                found.append(f"{where}.error_at: expected {errors}, got {short(record.get('error_at'))}")
    missing = [s for s in wanted if s not in seen]
    if missing:
        found.append(f"output.settings: ran under {len(seen)} of the {len(wanted)} settings this case asks for; "
                     f"missing {_listed(missing)}")
    return found


def _listed(settings) -> str:
    return ", ".join(f"workers={w} prefetch={p}" for w, p in settings)
