"""`python -m signoff.bot.cli`: the `signoff` command."""

from signoff.bot.cli import main

if __name__ == "__main__":
    main()
