"""rulka.server"""
