"""Renderers: one plain function per output format; the report never renders itself."""
