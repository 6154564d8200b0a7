"""The models' indexer-layer geometry, one home for the CLI presets and the tuning suites.

docs/contract.md ("Models") has the table; `explain --model NAME` and tuning/suites.py read it
from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelLayers:
    """One kind of indexer layer of a model: its geometry, its CSA ratio (a row at position p
    sees (p + 1) // ratio keys), the layers of one forward that share a Table schedule, and a
    typical key bound (`explain`'s default max_seq_len)."""

    name: str
    heads: int
    head_dim: int
    page_size: int
    pages_per_block: int
    gather: bool
    ratio: int
    layers: int
    max_seq_len: int

    def geometry(self) -> dict:
        """The mqa_logits_mxfp4_config / make_problem geometry keywords."""
        return dict(heads=self.heads, head_dim=self.head_dim, page_size=self.page_size,
                    pages_per_block=self.pages_per_block, gather=self.gather)


MODELS = {m.name: m for m in (
    # DeepSeek-V4: 64-token pages, CSA ratio 4; its 30 indexer layers share a schedule
    ModelLayers("deepseek_v4", heads=64, head_dim=128, page_size=64, pages_per_block=1, gather=False,
                ratio=4, layers=30, max_seq_len=65536),
    # DeepSeek-V4.1 full layers: 8-token pages, 32 a block-table entry, ratio 2
    ModelLayers("deepseek_v4_1", heads=32, head_dim=128, page_size=8, pages_per_block=32, gather=False,
                ratio=2, layers=3, max_seq_len=65536),
    # DeepSeek-V4.1 candidate layers: each row its own table of 2048 blocks of 8 tokens
    ModelLayers("deepseek_v4_1_candidate", heads=32, head_dim=128, page_size=8, pages_per_block=1,
                gather=True, ratio=1, layers=4, max_seq_len=16384),
)}
