"""rulka.agents"""
