"""Turning results into tables, figures and planning reports."""
