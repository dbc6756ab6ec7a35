"""rulka.trainer"""
