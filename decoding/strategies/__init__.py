"""The shipped strategies. Importing this package registers every one of them.

Each method registers itself where it is written (`@register_strategy` in its module; see
`decoding.registry`); this package only imports the modules. `STRATEGIES`, `get_strategy` and
`param_specs` are re-exported from the registry for callers that import them from here.
"""

from __future__ import annotations

from decoding.registry import STRATEGIES, StrategyInfo, get_strategy, param_specs  # noqa: F401
# registration order is menu order: token strategies, speculative, scaling, diffusion
from decoding.strategies import autoregressive  # noqa: F401, I001
from decoding.strategies import speculative  # noqa: F401
from decoding.strategies import scaling  # noqa: F401
from decoding.strategies import diffusion  # noqa: F401
