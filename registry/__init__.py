"""The hi-moe-lora control plane: adapter registry, dispatcher and OpenAI front door."""
