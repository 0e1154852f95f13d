import sys

from dcpdissect.cli import main     # absolute: also spark-submit's application file

sys.exit(main())
