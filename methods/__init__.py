"""Built-in method adapters: registry key -> lazy "module:Class" (the module name is the key, `-` -> `_`)."""

BUILTIN = {
    "grpo": "methods.grpo:GRPO",
    "grpo-joint": "methods.grpo:GRPOJoint",
    "opd-multi": "methods.opd_multi:OPDMulti",
    "opd-external": "methods.opd_external:OPDExternal",
    "self-grpo": "methods.self_grpo:SelfGRPO",
    "sft": "methods.sft:SFT",
    "recover": "methods.recover:Recover",
}

# `bench reproduce`: every method the findings of arXiv:2611.08453 compare, on both multi-domain
# suites, then each (method, suite) of `extra` (the single-domain recovery protocol of finding 4, on
# both suites: on four_domain the student loses its first domain to three others, not one).
REPRODUCE = {
    "methods": ("grpo-joint", "opd-multi", "opd-external", "self-grpo", "sft"),
    "suites": ("math_code", "four_domain"),
    "extra": (("recover", "math_code"), ("recover", "four_domain")),
}
