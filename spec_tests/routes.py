"""The two routes of the loader's fetch step (§1), called directly for §4 tests.

``gather`` reads a dataset's packed view without the GIL (the route a loader takes for a
packed dataset without a transform); ``read`` calls ``get_sample`` for every slot (the
route for any other dataset, or with a transform). Both end in the collator (§4).
"""
from onemodel_cy.collate.fetch import build_batch


def gather(collator, dataset, indices, seed, epoch, step, **options):
    return build_batch(collator, dataset, indices, seed, epoch, step, route="packed", **options)


def read(collator, dataset, indices, seed, epoch, step, **options):
    return build_batch(collator, dataset, indices, seed, epoch, step, route="samples", **options)
