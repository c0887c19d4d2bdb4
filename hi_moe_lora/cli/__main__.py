import sys

from hi_moe_lora.cli import main

sys.exit(main())
