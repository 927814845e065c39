"""`python -m signoff`: the `signoff` command."""

from signoff.bot.cli import main

main()
