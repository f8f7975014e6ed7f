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
