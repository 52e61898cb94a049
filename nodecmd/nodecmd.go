package nodecmd

import shoalcli "shoal/cli"

// Commands are the commands of this package and where each goes in
// `shoal`'s tree, for cli.Main.
func Commands() []shoalcli.Extension {
	return []shoalcli.Extension{
		{Parent: []string{"node"}, Command: start},
		{Parent: []string{"cluster", "snapshot"}, Command: restore},
	}
}
