package protocol

import _ "example.com/m/cluster"
