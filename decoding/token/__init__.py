"""Token-level decoding: one model call per generated token (or per beam step), the Playground's methods.

    autoregressive.py  greedy, sampling (temperature, penalties, truncation), mirostat, contrastive
                       search, beam search; the token loop and token events the other methods share
    momentum.py        momentum decoding: greedy, but closing a loop (a revisited n-gram) is penalised
    adadec.py          AdaDec: where entropy is high, rerank the top-k by a short lookahead
    superposed.py      superposed decoding: k drafts from one forward pass over a mixed input
    extractive.py      exact-extract: the most probable answer span of the prompt's passage, scored exactly
    faster.py          faster without a drafter, each on a model trained for it: LUD, HAMburger, FTP
                       (their trained parts: hamburger_model.py, ftp_router.py)

`import decoding` imports every module here (`decoding.discover`); a new module is found without an
edit and listed after the ones named below.
"""

MENU_ORDER = ("autoregressive", "momentum", "adadec", "superposed", "extractive", "faster")  # first in the menu, in this order
