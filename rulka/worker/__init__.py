"""rulka.worker"""
