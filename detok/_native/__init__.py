"""The optional C extensions, all of them, behind thin Python wrappers elsewhere in detok (each
wrapper falls back to its Python twin when a module here is not built)."""
