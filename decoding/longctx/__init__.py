"""Long context: a prompt that is a book, with facts planted in it; retrieval and long-context speculation.

    document.py   the shipped long document: KJV chapters (assets/longctx/) cut to a token budget, key-value facts
                  (needles) planted at chosen depths, and questions about the facts and the text, each with a checker
    retriever.py  BM25 over chunks of the context (pure Python, nothing to download), deterministic
    rag.py        strategy `rag`: DRAG (the top-k retrieved chunks in the prompt, with demonstrations) and IterDRAG
                  (follow-up queries, each retrieving and answering, then the final answer) (Yue et al. 2024)
    rapid.py      drafter `rapid` of the speculative strategy: a draft path over the retrieved chunks only (its own
                  short cache) for a target that verifies on the whole context (RAPID, Chen et al. 2025)
    longspec.py   drafter `longspec`: a one-layer draft whose own cache is a sliding window plus sinks and which reads
                  the context through the target's last-layer cache (LongSpec, Yang et al. 2025); trained by
                  `decoding.training.longspec`
    ttt.py        strategy `ttt`: gradient steps of next-token loss on spans of the context updating the query
                  projections (qTTT, Bansal et al. 2025), then the answer; or the same FLOPs as thinking tokens
    adapt.py      what ttt needs of a shared model without writing it: a per-run view with the run's own trained
                  projections, the cache that hands the steps the prefill's frozen keys and values, a FLOP count

Glossary
    context      the long text the prompt carries (the document); the question follows it after a blank line.
    chunk        a run of consecutive context tokens (or words) the retriever scores as one unit.
    needle       a key-value fact planted in the context ("The secret number of Tavor is 4821."), at a depth.
    depth        where the evidence sits: the fraction of the context's tokens before it (0 = start, 1 = end).
    retrieved    the chunks the retriever ranks highest for a query, put back in document order.
"""

MENU_ORDER = ("rag",)  # first in the menu (`decoding.discover`)
