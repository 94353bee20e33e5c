"""Confluence Cloud (REST v2) and Data Center / Server (REST v1): see connector.py."""

from connectors.confluence.connector import ConfluenceConnector
from connectors.confluence.links import ContentIndex, resolve_links
from connectors.confluence.source import PAGE_EXTENSION, PAGE_MIME

__all__ = [
    "PAGE_EXTENSION",
    "PAGE_MIME",
    "ConfluenceConnector",
    "ContentIndex",
    "resolve_links",
]
