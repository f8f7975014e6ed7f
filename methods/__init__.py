"""Built-in method adapters: registry key -> lazy "module:Class" (the module name is the key)."""

BUILTIN = {
    "grpo": "methods.grpo:GRPO",
    "grpo-joint": "methods.grpo:GRPOJoint",
}
