package part

import _ "example.com/m/protocol"
