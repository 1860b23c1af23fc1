import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while starting up: the shell's convention, no traceback
    sys.exit(130)

main()
