"""The commands of ``python -m permits`` other than the demo, one module each (``__main__`` parses)."""
