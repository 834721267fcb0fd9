"""prep: corpus -> tokenized, memory-mapped, Megatron-compatible shards."""

__all__ = ["__version__"]
__version__ = "0.1.0"
