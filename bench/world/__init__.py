"""The world a run happens in: profiles, models (built tiny ones or local Hugging Face folders), the
prepared base student and external teacher (`prepare`), the shipped reference models and the
regime criteria a world is held to. See docs/world.md.
"""
