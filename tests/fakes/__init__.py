"""Local stand-ins for remote services, speaking their real wire formats."""
