# Type stubs for the compiled module onemodel_cy.collate.transform (a built-in transform
# over the slot table; its functions are C-level).

class TransformScratch: ...
