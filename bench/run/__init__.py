"""Running: one run (`runner`, with its `config`, `checkpoint`, `record` and `provenance`), its
independent phases (`phases`), many runs (`sweep`, on `executors`), and `conformance`, which runs a
method under the instrumented FLOP counter. See docs/design.md, The run.
"""
