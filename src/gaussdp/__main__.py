"""``python -m gaussdp``: the ``gaussdp`` command."""

from gaussdp.cli import app

app(prog_name="gaussdp")
