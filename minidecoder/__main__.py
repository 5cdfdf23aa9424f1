import sys

from minidecoder.cli import main

sys.exit(main())
