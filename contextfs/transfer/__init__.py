"""Copy in, copy out: `export`/`import` of markdown trees and vaults (`vault`, with where an
import writes in `vault_targets`) and `salvage` of a damaged store into the same records."""
