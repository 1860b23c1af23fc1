"""Rendering: a command's Document as table, markdown, csv or json text (``tables``), and the progress bar
long commands draw on stderr (``progress``). Light on purpose: ``tabular`` draws tabulate's
layouts without importing it."""
