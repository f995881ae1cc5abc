"""``memmodel models``: the bundled model shapes --model takes."""

from __future__ import annotations

import click

from .options import Command, format_option


@click.command("models", cls=Command)
@format_option(("table", "json"), json="JSON on stdout, one object per model")
def models_cmd(*, fmt: str) -> None:
    """The models --model NAME knows: query heads, key/value heads and head dimension, each read
    from the model's config.json (cited). --model also takes a Hugging Face config.json."""
    from ..model_shapes import MODELS
    from . import terminal

    if fmt == "json":
        from dataclasses import asdict

        terminal.print_json([asdict(m) for m in MODELS.values()])
        return
    rows = [(m.name, m.heads, m.kv_heads, m.head_dim, m.repository) for m in MODELS.values()]
    con = terminal.console()
    con.print(
        terminal.table(
            None,
            [
                ("name", "left"),
                ("heads", "right"),
                ("KV heads", "right"),
                ("head dim", "right"),
                ("config.json of", "left"),
            ],
            rows,
        )
    )
    con.print("[dim]config.json of: https://huggingface.co/<repository>/blob/main/config.json[/]", soft_wrap=True)
    for m in MODELS.values():
        note = m.note or (
            f"every layer attends within a {m.window}-token sliding window (--window {m.window})" if m.window else ""
        )
        if note:
            con.print(f"{terminal.escape(m.name)}: {terminal.escape(note)}", soft_wrap=True)
