"""Renderers: message rows, finding tables, JSON lines, Markdown."""
