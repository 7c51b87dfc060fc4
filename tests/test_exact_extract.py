"""Exact extraction (strategy exact-extract): the best span is the brute-force best."""





