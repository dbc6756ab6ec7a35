"""rulka.envs"""
