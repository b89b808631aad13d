"""ator's own lint rules (not part of the installed package)."""
