"""The box's age identity: decrypting the fleet repo's secrets (pyrage)."""
