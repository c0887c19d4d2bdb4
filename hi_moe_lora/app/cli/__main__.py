import sys

from hi_moe_lora.app.cli import main

sys.exit(main())
