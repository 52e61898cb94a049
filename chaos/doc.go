// Package chaos will hold shoal's chaos suite (a later issue). Its fault
// injectors start here: dockerproxy sits in front of the Docker socket and
// delays, holds or fails chosen engine API calls.
package chaos
