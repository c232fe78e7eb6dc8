import sys

from ..errors import exit_on_user_error
from .cli import main

sys.exit(exit_on_user_error(main))
