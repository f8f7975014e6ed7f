"""FLOP accounting: the analytic formulas (`flops`), the ledger every charge lands in (`ledger`), the
hooks that charge a model's every call (`metering`), and the instrumented counts that audit them
(`counting`, `audit`). See docs/design.md, FLOP accounting.
"""
