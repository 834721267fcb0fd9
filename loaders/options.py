"""Which LoaderConfig options act in which mode, and the refusal of one set where it does nothing.

    option          windows   packed            grouped
    doc_aligned     yes       -                 -
    packing         -         yes               -
    long_docs       -         packing='bfd'     -
    attention_mask  -         yes               - (grouped batches always carry their padding mask)
    pad_multiple    -         -                 yes
    max_tokens      -         -                 yes (refused in LoaderConfig with its own batch_size advice)
    megabatch       -         -                 yes
    every other     yes       yes               yes   (batch_size, seq_len, split, shuffle, seed, drop_last,
                                                       samples_per_epoch)

A non-default value outside its row's modes was silently ignored (pad_multiple=16 in windows mode
left every batch as it was); it is refused, naming the option, the mode and where it applies. The
default passed explicitly is accepted, so a config shared across modes keeps working.
"""

from __future__ import annotations

from dataclasses import fields

from pipeline.errors import PrepError

__all__ = ["APPLIES", "applies", "check_options_apply", "options_for_mode"]

# option -> (modes it acts in, the words for where it applies)
APPLIES: dict[str, tuple[tuple[str, ...], str]] = {
    "doc_aligned": (("windows",), "mode 'windows'"),
    "packing": (("packed",), "mode 'packed'"),
    "long_docs": (("packed",), "mode 'packed' with packing='bfd' (concat cuts documents at row ends)"),
    "attention_mask": (("packed",), "mode 'packed' (grouped batches always carry their padding attention_mask)"),
    "pad_multiple": (("grouped",), "mode 'grouped'"),
    "max_tokens": (("grouped",), "mode 'grouped'"),
    "megabatch": (("grouped",), "mode 'grouped'"),
}


def applies(option: str, mode: str, packing: str = "bfd") -> bool:
    """Whether `option` changes the batches of `mode` (with `packing`, for long_docs)."""
    if option not in APPLIES:
        return True
    if option == "long_docs" and packing != "bfd":
        return False
    return mode in APPLIES[option][0]


def check_options_apply(cfg) -> None:
    """Refuse a non-default value of an option that has no effect in cfg's mode (a LoaderConfig)."""
    defaults = {f.name: f.default for f in fields(cfg)}
    for option, (_, where) in APPLIES.items():
        value = getattr(cfg, option)
        if value != defaults[option] and not applies(option, cfg.mode, cfg.packing):
            mode = f"mode {cfg.mode!r}" + (f" with packing={cfg.packing!r}" if cfg.mode == "packed" else "")
            raise PrepError(f"{option}={value!r} has no effect in {mode}: it applies to {where} only; "
                            f"leave {option} out (or at its default {defaults[option]!r})")


def options_for_mode(options: dict, mode: str) -> dict:
    """The options of a config meant for several modes (`prep bench-loader`) that act in `mode`."""
    packing = options.get("packing", "bfd")
    return {k: v for k, v in options.items() if applies(k, mode, packing)}
