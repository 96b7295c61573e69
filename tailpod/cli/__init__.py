"""The `tailpod` command line (typer). One module per verb; `main.py` assembles them."""
