# Type stubs for the compiled module onemodel_cy.data.textlines (the SyntheticTextLines dataset).
from collections.abc import Sequence
from typing import SupportsFloat, SupportsIndex

import numpy.typing as npt

from typing_extensions import disjoint_base

from onemodel_cy.data.datasets import ArrayImageDataset
from onemodel_cy.data.vocabulary import Vocabulary

# The dataset's two derive streams (layout, pixels), beside those of §2.
STREAM_TEXT_LAYOUT: int
STREAM_TEXT_PIXELS: int
# "0123456789ABCDEF": target id t is GLYPHS[t - 1].
GLYPHS: str
GLYPH_WIDTH: int
GLYPH_HEIGHT: int
# One tuple of seven 5-bit rows per glyph, top row first; bit 4 is the leftmost column.
FONT: tuple[tuple[int, int, int, int, int, int, int], ...]

@disjoint_base
class SyntheticTextLines(ArrayImageDataset):
    @property
    def height(self) -> int: ...
    @property
    def min_length(self) -> int: ...
    @property
    def max_length(self) -> int: ...
    @property
    def num_symbols(self) -> int: ...
    @property
    def scale(self) -> int: ...
    # float32-rounded
    @property
    def noise(self) -> float: ...
    @property
    def seed(self) -> int: ...
    # Vocabulary("0123..."): the character of each target id, the CTC blank (id 0) first.
    @property
    def vocabulary(self) -> Vocabulary: ...
    # The text of a target under `vocabulary` (ValueError for the blank or an id past it).
    def decode(self, target: Sequence[int] | npt.ArrayLike) -> str: ...
    # Initialises once: a second call raises RuntimeError.
    def __init__(
        self,
        count: SupportsIndex,
        height: SupportsIndex = 24,
        min_length: SupportsIndex = 1,
        max_length: SupportsIndex = 6,
        num_symbols: SupportsIndex = 10,
        scale: SupportsIndex = 2,
        noise: SupportsFloat = 0.5,
        seed: SupportsIndex = 0,
    ) -> None: ...
    def __reduce__(  # type: ignore[override]  # rebuilt from its parameters, not its arrays
        self,
    ) -> tuple[type[SyntheticTextLines], tuple[int, int, int, int, int, int, float, int]]: ...
