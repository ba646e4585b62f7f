import sys

from waybill.cli.main import main

sys.exit(main())
